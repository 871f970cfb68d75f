from reappreg.cli import main

main()
