"""Queries: DuckDB views over the log, the named query catalog, Sigma detections.

DuckDB is loaded only when a query runs.
"""
