"""
What a Spark cluster has and what an application asks of it: read by the driver's slot wait and by the Airflow side
(the standalone hook's slot check) alike.
"""
