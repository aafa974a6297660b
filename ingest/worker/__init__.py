"""The worker: consume hook events, evaluate them, append outcomes to the log, answer, ack."""
