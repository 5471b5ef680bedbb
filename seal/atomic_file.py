"""Moved to seal/runs/atomic_file.py; kept importable for env_service/engine.py, whose
import another change is editing (remove once it imports seal.runs.atomic_file)."""

from seal.runs.atomic_file import StateFileError, read_json, write_json_atomic, write_text_atomic

__all__ = ["StateFileError", "read_json", "write_json_atomic", "write_text_atomic"]
