from exporter.cli.main import main

main()
