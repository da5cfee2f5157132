from sapiens2_ft.serve.cli import main

main()
