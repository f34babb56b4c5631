from fuseplan.launch import main

main()
