"""`hookaudit relay`: the long-lived half of a fast `hookaudit emit`, on a unix socket."""
