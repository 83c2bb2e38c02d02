from adapter.cli.main import main

main()
