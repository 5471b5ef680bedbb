"""BFCL itself: tasks, ground truth, backends, call parsing, prompts, and the diagnosis that
tags each ground-truth turn (docs/design.md, "BFCL facts")."""
