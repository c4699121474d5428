"""The data pipeline on Apache Spark. Not built yet."""
