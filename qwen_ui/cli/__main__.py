import sys

from qwen_ui.cli import main

sys.exit(main())
