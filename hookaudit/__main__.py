from hookaudit.entry import main

main()
