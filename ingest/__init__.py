"""The stream: emit and serve put hook events on NATS, the worker decides and appends to the
log (`ingest.log`), the SIEM forwarder streams the log's outcomes out.
"""
