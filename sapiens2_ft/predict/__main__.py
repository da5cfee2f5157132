from sapiens2_ft.predict.cli import main

main()
