"""zcbot channels service: iLink long-poll loops (one per binding across replicas), push delivery.

The WeCom callback is an HTTP endpoint on the gateway (`zcbot_gateway.routes.channels`); the
shared adapter code lives in `zcbot_core.channels`.
"""
