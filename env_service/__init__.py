"""The BFCL environment service: episodes against BFCL's real backends, verified and tagged,
over a native HTTP API and the original release's protocol (docs/service.md)."""
