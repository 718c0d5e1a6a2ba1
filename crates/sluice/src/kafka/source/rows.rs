//! Kafka records as Arrow rows, in Spark's Kafka schema (`key`, `value`, `topic`, `partition`,
//! `offset`, `timestamp`, `timestampType`, and `headers` with `includeHeaders`).

use std::sync::Arc;

use arrow::array::{
    BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, RecordBatch, StringBuilder,
    StructBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field};
use rdkafka::message::{Headers, Message};

use super::{header_fields, kafka_schema_with};
use crate::error::{Result, SluiceError};

/// Kafka records as Arrow rows (Spark's Kafka schema).
pub(super) struct KafkaRows {
    include_headers: bool,
    key: BinaryBuilder,
    value: BinaryBuilder,
    topic: StringBuilder,
    part: Int32Builder,
    off: Int64Builder,
    ts: TimestampMicrosecondBuilder,
    tst: Int32Builder,
    headers: ListBuilder<StructBuilder>,
}

impl KafkaRows {
    pub(super) fn new(include_headers: bool) -> Self {
        Self {
            include_headers,
            key: BinaryBuilder::new(),
            value: BinaryBuilder::new(),
            topic: StringBuilder::new(),
            part: Int32Builder::new(),
            off: Int64Builder::new(),
            ts: TimestampMicrosecondBuilder::new(),
            tst: Int32Builder::new(),
            headers: ListBuilder::new(StructBuilder::from_fields(header_fields(), 0)).with_field(
                Arc::new(Field::new(
                    "element",
                    DataType::Struct(header_fields()),
                    true,
                )),
            ),
        }
    }

    pub(super) fn len(&self) -> usize {
        arrow::array::ArrayBuilder::len(&self.part)
    }

    pub(super) fn push<M: Message>(&mut self, msg: &M) -> Result<()> {
        self.key.append_option(msg.key());
        self.value.append_option(msg.payload());
        self.topic.append_value(msg.topic());
        self.part.append_value(msg.partition());
        self.off.append_value(msg.offset());
        let (kind, ms) = match msg.timestamp() {
            rdkafka::Timestamp::NotAvailable => (-1, None),
            rdkafka::Timestamp::CreateTime(ms) => (0, Some(ms)),
            rdkafka::Timestamp::LogAppendTime(ms) => (1, Some(ms)),
        };
        self.ts.append_option(ms.map(|m| m * 1000));
        self.tst.append_value(kind);
        if self.include_headers {
            let entries = self.headers.values();
            if let Some(hs) = msg.headers() {
                for h in hs.iter() {
                    entries
                        .field_builder::<StringBuilder>(0)
                        .ok_or_else(|| SluiceError::internal("header key builder"))?
                        .append_value(h.key);
                    entries
                        .field_builder::<BinaryBuilder>(1)
                        .ok_or_else(|| SluiceError::internal("header value builder"))?
                        .append_option(h.value);
                    entries.append(true);
                }
            }
            self.headers.append(true);
        }
        Ok(())
    }

    pub(super) fn finish(mut self) -> Result<RecordBatch> {
        let mut columns: Vec<arrow::array::ArrayRef> = vec![
            Arc::new(self.key.finish()),
            Arc::new(self.value.finish()),
            Arc::new(self.topic.finish()),
            Arc::new(self.part.finish()),
            Arc::new(self.off.finish()),
            Arc::new(self.ts.finish()),
            Arc::new(self.tst.finish()),
        ];
        if self.include_headers {
            columns.push(Arc::new(self.headers.finish()));
        }
        Ok(RecordBatch::try_new(
            kafka_schema_with(self.include_headers),
            columns,
        )?)
    }
}
