"""`mailroom inbound`: the SMTP/LMTP server for the bounce domain, and the
parsing of what comes back (DSNs, feedback reports, VERP addresses)."""
