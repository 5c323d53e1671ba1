from inswitch.cli import main

main()
