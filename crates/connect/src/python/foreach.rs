//! `foreach`: the client pickles `(func, None, serializer, serializer)`, where `func(partition_id,
//! iterator)` is `DataStreamWriter._construct_foreach_function(f)`: it calls `f(row)` per row, or
//! `open(partition_id, epoch_id)` / `process(row)` / `close(error)` of a writer object, taking
//! the epoch from `TaskContext.get().getLocalProperty("streaming.sql.batchId")`.
//!
//! Spark runs it in its executor worker (`pyspark.worker`, the RDD `mapPartitions` protocol:
//! task context, broadcast variables, pickled row batches). pyspark-client ships no worker
//! module for it, so Sluice runs a small driver script of its own on the client's interpreter,
//! built from the client's pieces (`check_python_version`, `read_command`,
//! `ArrowTableToRowsConversion`, the same conversion `collect()` uses), importing each from where
//! the client's version has it (pyspark 3.5 to 4.x). Its protocol, after the pid: the Python version and the pickled command,
//! answered `0`; then per partition of a batch: the batch id (`long`), the partition id (`int`)
//! and the partition's rows as one Arrow IPC stream (bytes), answered `0` or `-2` and the
//! traceback (the worker stays usable: the exception fails the batch, not the worker).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::writer::StreamWriter;
use sluice::BatchData;

use crate::error::{ConnectError, Result};
use crate::proto;

use super::worker::{handshake, Frame, Launch, Worker, WorkerInterrupt};
use super::PythonConfig;

/// Sluice's driver script for a `foreach` writer.
const FOREACH_DRIVER: &str = r#""""Sluice's driver for a PySpark foreach writer (crates/connect/src/python/foreach.rs).
The same code runs on pyspark 3.5 to 4.x: what moved between versions is imported from where
each version has it."""
import os
import socket
import traceback

from pyspark.serializers import (SpecialLengths, CPickleSerializer, UTF8Deserializer, read_int,
                                 read_long, write_int, write_with_length)
from pyspark.worker_util import check_python_version

try:  # pyspark 4.0 on
    from pyspark.worker_util import read_command
except ImportError:  # 3.5
    from pyspark.worker import read_command


def answer_exception(outfile):
    write_int(SpecialLengths.PYTHON_EXCEPTION_THROWN, outfile)
    write_with_length(traceback.format_exc().encode("utf-8"), outfile)


def main(infile, outfile):
    try:
        check_python_version(infile)
        func = read_command(CPickleSerializer(), infile)[0]
        import pyarrow as pa
        try:  # pyspark 4.0 on
            from pyspark.sql.conversion import ArrowTableToRowsConversion
        except ImportError:  # 3.5
            from pyspark.sql.connect.conversion import ArrowTableToRowsConversion
        from pyspark.sql.pandas.types import from_arrow_schema
        from pyspark.taskcontext import TaskContext
    except BaseException:
        answer_exception(outfile)
        outfile.flush()
        return
    write_int(0, outfile)
    outfile.flush()
    while True:
        try:
            batch_id = read_long(infile)
        except EOFError:
            return
        partition_id = read_int(infile)
        data = infile.read(read_int(infile))
        try:
            table = pa.ipc.open_stream(data).read_all()
            rows = ArrowTableToRowsConversion.convert(table, from_arrow_schema(table.schema))
            context = TaskContext._getOrCreate()
            context._partitionId = partition_id
            context._localProperties = {"streaming.sql.batchId": str(batch_id)}
            for _ in func(partition_id, iter(rows)) or []:
                pass
            write_int(0, outfile)
        except BaseException:
            answer_exception(outfile)
        outfile.flush()


def connect():
    """Spark's worker handshake over loopback TCP: the secret, the server's "ok", our pid."""
    sock = socket.create_connection(("127.0.0.1", int(os.environ["PYTHON_WORKER_FACTORY_PORT"])))
    sock_file = sock.makefile("rwb", 65536)
    write_with_length(os.environ["PYTHON_WORKER_FACTORY_SECRET"].encode("utf-8"), sock_file)
    sock_file.flush()
    if UTF8Deserializer().loads(sock_file) != "ok":
        raise RuntimeError("the Sluice server refused this worker's secret")
    write_int(os.getpid(), sock_file)
    sock_file.flush()
    return sock_file


if __name__ == "__main__":
    sock_file = connect()
    try:
        main(sock_file, sock_file)
    finally:
        sock_file.close()
"#;

/// A running `foreach` writer worker: one per streaming query.
pub struct ForeachWriterWorker {
    worker: Worker,
}

impl std::fmt::Debug for ForeachWriterWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeachWriterWorker")
            .finish_non_exhaustive()
    }
}

impl ForeachWriterWorker {
    /// A handle that kills this worker from another thread (`query.stop()` while a call
    /// blocks): the blocked call then returns an error saying the query was stopped.
    pub fn interrupter(&self) -> WorkerInterrupt {
        self.worker.interrupter()
    }

    /// Starts the worker with the pickled writer
    /// (`WriteStreamOperationStart.foreach_writer.python_function`).
    pub fn start(config: &PythonConfig, function: &proto::PythonUdf) -> Result<Self> {
        // A file, not `-c`: pyspark's import checks take a `-c` program for doctests.
        let launch = Launch::Script {
            name: "foreach_driver.py",
            text: FOREACH_DRIVER,
        };
        let mut worker = Worker::spawn(config, "foreach", launch)?;
        let rest = Frame::default().bytes(&function.command)?;
        handshake(&mut worker, config, &function.python_ver, rest)?;
        Ok(Self { worker })
    }

    /// Writes batch `batch_id`: every partition (empty ones too, as Spark opens every
    /// partition's writer) goes to the writer in turn. The first exception stops the batch and
    /// is the error, with the traceback.
    pub fn call(&mut self, batch_id: i64, data: &BatchData) -> Result<()> {
        let schema = python_schema(&data.schema);
        let partitions: Vec<&[RecordBatch]> = if data.partitions.is_empty() {
            vec![&[]]
        } else {
            data.partitions.iter().map(|p| p.as_slice()).collect()
        };
        for (partition_id, batches) in partitions.into_iter().enumerate() {
            let ipc = encode(&schema, batches)?;
            let partition = i32::try_from(partition_id).unwrap_or(i32::MAX);
            let frame = Frame::default().long(batch_id).int(partition).bytes(&ipc)?;
            self.worker.request(
                &frame.0,
                &format!("partition {partition_id} of batch {batch_id}"),
                None,
            )?;
        }
        Ok(())
    }
}

/// The schema with view types as their plain forms (pyspark's Arrow conversion predates views).
fn python_schema(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_data_type(plain(f.data_type())))
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

fn plain(t: &DataType) -> DataType {
    match t {
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        other => other.clone(),
    }
}

/// The partition's batches as one IPC stream of `schema`.
fn encode(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut writer = StreamWriter::try_new(&mut out, schema)?;
        for batch in batches {
            let columns = batch
                .columns()
                .iter()
                .zip(schema.fields())
                .map(|(c, f)| {
                    if c.data_type() == f.data_type() {
                        Ok(c.clone())
                    } else {
                        arrow::compute::cast(c, f.data_type())
                    }
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| {
                ConnectError::new(
                    crate::error::java::INTERNAL,
                    sluice::error::class::INTERNAL_ERROR,
                    format!("a foreach batch does not match its schema: {e}"),
                )
            })?;
            writer.write(&batch)?;
        }
        writer.finish()?;
    }
    Ok(out)
}
