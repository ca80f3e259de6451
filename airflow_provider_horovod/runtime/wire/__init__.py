"""
What travels between the Airflow side, the driver, the tasks and the ranks: the payload format, pickling, the job
spec, the rank protocol and the log channel.
"""
