"""Development and test tools: the embedded PostgreSQL cluster, the SMTP
sink and `mailroom demo`. `mailroom run` never imports them."""
