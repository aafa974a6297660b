"""Hook configuration that sends an agent's hook events to hookaudit."""
