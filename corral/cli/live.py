"""Commands that talk to a live control plane: up, submit, ls, show, logs, cancel, ..."""
