from mooncake_pd.cli import main

raise SystemExit(main())
