from sapiens2_ft.app.cli import main

main()
