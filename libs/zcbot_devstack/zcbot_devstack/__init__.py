"""The development stack: the `zcbot` command (`cli`), `zcbot up` (`stack`, with `output` and
`bootstrap`), the embedded NATS/PostgreSQL servers (`embedded`) and the one list of services
(`services`). The product (libs/zcbot_core, services/*) imports nothing from here."""
