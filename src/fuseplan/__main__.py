from fuseplan.cli import main

main()
