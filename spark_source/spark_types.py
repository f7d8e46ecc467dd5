"""snapview column types as Spark types (built without a SparkSession, as data sources must)."""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kvstore.schema import DataType as SvType
from kvstore.table_info import TableInfo
from spark_source.options import CHANGE_TYPE, COMMIT_TS


def spark_type(t: SvType) -> DataType:
    if t.kind == "DECIMAL":
        return DecimalType(t.precision, t.scale)
    return {
        "BIGINT": LongType(),
        "INT": IntegerType(),
        "DOUBLE": DoubleType(),
        "BOOLEAN": BooleanType(),
        "STRING": StringType(),
        "DATE": DateType(),
        "TIMESTAMP": TimestampType(),
        "BINARY": BinaryType(),
    }[t.kind]


def table_struct(info: TableInfo, with_changes: bool = False) -> StructType:
    fields = [
        StructField(c.name, spark_type(c.type), c.nullable)
        for c in info.table_schema.visible_columns
    ]
    if with_changes:
        fields += [
            StructField(CHANGE_TYPE, StringType(), False),
            StructField(COMMIT_TS, LongType(), False),
        ]
    return StructType(fields)
