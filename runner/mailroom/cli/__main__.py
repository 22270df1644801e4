from mailroom.cli import main

main(prog_name="mailroom")
