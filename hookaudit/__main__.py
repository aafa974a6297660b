from hookaudit.cli import main

main()
