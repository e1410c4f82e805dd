from ams_app.cli import main

raise SystemExit(main())
