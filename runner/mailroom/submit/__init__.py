"""`mailroom submit`: the SMTP submission front door (docs/submission.md).

message.py turns a submitted MIME mail into enqueue's arguments; server.py
is the aiosmtpd server (AUTH over TLS only, STARTTLS and implicit TLS) that
checks the login's identity and queues the mail in one transaction before
it answers 250.
"""
