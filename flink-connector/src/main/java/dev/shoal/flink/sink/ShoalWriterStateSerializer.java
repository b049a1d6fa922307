package dev.shoal.flink.sink;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import org.apache.flink.connector.base.sink.writer.AsyncSinkWriterStateSerializer;

/**
 * Serialises the records a writer still buffers at a checkpoint (only under {@code none}: under
 * {@code at-least-once} the writer sends its whole buffer before the checkpoint, so the state is
 * empty). Version 1: length-prefixed UTF-8 JSON documents.
 */
final class ShoalWriterStateSerializer extends AsyncSinkWriterStateSerializer<byte[]> {

  @Override
  protected void serializeRequestToStream(byte[] request, DataOutputStream out) throws IOException {
    out.writeInt(request.length);
    out.write(request);
  }

  @Override
  protected byte[] deserializeRequestFromStream(long requestSize, DataInputStream in) throws IOException {
    byte[] request = new byte[in.readInt()];
    in.readFully(request);
    return request;
  }

  @Override
  public int getVersion() {
    return 1;
  }
}
