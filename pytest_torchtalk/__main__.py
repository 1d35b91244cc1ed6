import sys

from pytest_torchtalk.cli import main

sys.exit(main())
