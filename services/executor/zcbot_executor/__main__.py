from zcbot_executor.main import main

main()
