"""Who a user is and what they may spend: passwords and tokens (`auth`), the admin's user commands
(`users_admin`), the daily/monthly budgets (`budgets`) and the usage ledger (`usage`).

Imported by the services and by the agent's budget checks; it imports the platform, db and the model
client's cost figures, never a service.
"""
