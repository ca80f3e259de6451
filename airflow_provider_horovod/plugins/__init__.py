"""
The provider's Airflow UI plugin: a "Training progress" tab on the task instance page (progress bar with ETA, a live
chart of each metric over steps, per-rank last step, links to the Spark UI and the TensorBoard directory), served by
a small FastAPI app under ``/horovod`` in the api-server.
"""
