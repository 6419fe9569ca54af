"""Phone notifications: message.py (what a notification says, a pod's words defanged), channels.py (one
class per service), urls.py (GPUC_NOTIFY_URLS read into channels), notifier.py (the outbox first, then every
channel: retried, rate-limited, never raising)."""
