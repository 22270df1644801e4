"""The runner (`mailroom run`): claims mail, renders and signs it, sends it
over SMTP on many connections, and reports outcomes to the database each
mail came from.

    runner      composes the parts below and decides which database to claim from
    database    one database's pool, completer, templates, wake-ups, heartbeat
    sendpool    the SMTP connections (asyncsmtp on an event loop, or transport's threads)
    completer   buffers outcomes and releases until the database takes them
    heartbeat   the runner's row in mailroom.runners
    render, dkim, unsubscribe, verp   what a mail becomes on the wire
"""
