"""hookaudit package."""
