from verl_bundle.cli import main

main()
