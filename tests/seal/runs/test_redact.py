"""A command line's secrets are masked for the files a run writes (seal/runs/redact.py):
any spelling of a secret key's value, and the known secrets wherever they occur."""

from __future__ import annotations

from seal.runs.redact import REDACTED, redact_argv


def test_values_of_secret_keys_and_flags_are_masked_and_nothing_else():
    argv = ["--conf", "x.yaml", "--", "service.token=abc", "++service.token=def",
            "--token", "ghi", "--api-key=jkl", "trainer.model.tokenizer=Qwen/Q",
            "--max-tokens", "8", "service.token="]  # fmt: skip
    assert redact_argv(argv) == [
        "--conf", "x.yaml", "--", f"service.token={REDACTED}", f"++service.token={REDACTED}",
        "--token", REDACTED, f"--api-key={REDACTED}", "trainer.model.tokenizer=Qwen/Q",
        "--max-tokens", "8", "service.token=",
    ]  # fmt: skip


def test_a_known_secret_is_masked_wherever_it_occurs():
    secret = "s3cr3t-value"
    argv = [f"service={{token: {secret}}}", f"note={secret}{secret}", "name=run"]
    assert redact_argv(argv, [secret, None, ""]) == [
        f"service={{token: {REDACTED}}}",
        f"note={REDACTED}{REDACTED}",
        "name=run",
    ]
