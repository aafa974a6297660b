"""The emitter's disk spool: events kept while NATS is unreachable, flushed in order later."""
