"""Helpers the tests share: waiting for a condition, starting and stopping hookaudit's
processes, loopback HTTP servers, and the stacks and fixtures of each suite (relay, SIEM,
podman, roles, faults, agents), plus the in-Python Sigma reference."""
