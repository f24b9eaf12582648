"""``python -m kproducer.mock --brokers 3 --topic t:6``"""
import sys

from .cli import main

sys.exit(main())
