"""`hookaudit emit`: an agent's command hook, one event from stdin to JetStream and back.

`fast.py` is the path an agent's hook takes first (stdlib only, through the relay); the
rest is the whole command, used when no relay answers.
"""
