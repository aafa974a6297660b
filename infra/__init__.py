"""Data hookaudit ships: example policies, Sigma rules, agent settings snippets, NATS,
compose and systemd configuration. Installed with the package, so `hookaudit demo` and the
examples find them from a wheel as from a checkout (`Path(infra.__file__).parent`)."""
