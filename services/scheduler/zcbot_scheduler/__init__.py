"""The scheduler service: cron jobs -> run requests, outcome tracking, notify fallback (seed 003 §8.5)."""
