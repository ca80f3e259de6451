"""TaskFlow decorators of this provider (``@task.horovod``)."""
