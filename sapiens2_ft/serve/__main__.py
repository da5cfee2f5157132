import sys

from sapiens2_ft.serve.cli import main

sys.exit(main())
