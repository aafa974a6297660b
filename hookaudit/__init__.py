"""The command line: the root click group (`hookaudit.cli`), one module per command
(`*_cmd.py`), and the options they share (`hookaudit.options`).

Nothing below this package imports it or click (an import contract holds it).
"""
