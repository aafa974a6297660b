"""SIEM streaming: outcomes from NATS to syslog, RELP, files, HEC, Elastic or webhooks, in
CEF, ECS or OCSF. The forwarder loads only the sink it sends to.
"""
