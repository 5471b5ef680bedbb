"""Endpoint scoring: a model behind a chat endpoint played on BFCL tasks (seal-eval), and the
`replay` job's scripted policies; both write validation records that seal.report reads."""
