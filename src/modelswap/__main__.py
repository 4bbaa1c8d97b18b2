from modelswap.cli import main

raise SystemExit(main())
