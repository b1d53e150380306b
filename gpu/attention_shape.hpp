#pragma once
// The shape of a model's attention as the kernels see it: head counts, and which keys a query sees. Every layer sees
// the keys up to its query; a model with sliding layers (gpt-oss: every other layer, 128 positions) limits those to
// the last `sliding_window` positions, and at_layer gives the shape of one layer's call.

namespace illm::gpu {

/// Head counts of an attention call and the keys a query sees; the softmax scale is 1/sqrt(head_dim).
struct attention_shape {
  int n_heads = 0;     ///< query heads
  int n_kv_heads = 0;  ///< key/value heads, dividing n_heads
  int head_dim = 0;
  /// What the kernels read: a query at position p sees keys at positions p - window + 1 .. p (0: every key up to p).
  int window = 0;
  int sliding_window = 0;  ///< the model's: keys a sliding layer's query sees (itself included); 0: none slide
  int sliding_period = 0;  ///< layer l slides where l % period < period - 1 (gpt-oss: 2, from layer 0); 0: all do

  /// Whether layer `layer` of the model slides (as llama.cpp's sliding-window pattern says).
  bool slides(int layer) const {
    return sliding_window > 0 && (sliding_period == 0 || layer % sliding_period < sliding_period - 1);
  }
  /// The shape of layer `layer`'s call: window set where it slides.
  attention_shape at_layer(int layer) const {
    attention_shape s = *this;
    s.window = slides(layer) ? sliding_window : 0;
    return s;
  }
};

}  // namespace illm::gpu
