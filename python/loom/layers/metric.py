"""Evaluation metrics built as ops: accuracy and chunk_eval."""
from ..layer_helper import LayerHelper

__all__ = ["accuracy", "chunk_eval"]


def accuracy(input, label, k=1, correct=None, total=None):
    helper = LayerHelper("accuracy")
    values = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    indices = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("top_k", inputs={"X": input}, outputs={"Out": values, "Indices": indices},
                     attrs={"k": k})
    acc = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    correct = correct or helper.create_variable_for_type_inference("int32", stop_gradient=True)
    total = total or helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("accuracy", inputs={"Out": values, "Indices": indices, "Label": label},
                     outputs={"Accuracy": acc, "Correct": correct, "Total": total})
    return acc


def chunk_eval(input, label, chunk_scheme, num_chunk_types, excluded_chunk_types=None,
               seq_length=None):
    """(precision, recall, f1_score, num_infer_chunks, num_label_chunks, num_correct_chunks)
    of the chunks in input's tags against label's (IOB, IOE, IOBES or plain)."""
    if seq_length is not None:
        raise NotImplementedError("chunk_eval: seq_length (padded input) is not supported")
    helper = LayerHelper("chunk_eval")
    f = [helper.create_variable_for_type_inference("float32", stop_gradient=True)
         for _ in range(3)]
    n = [helper.create_variable_for_type_inference("int64", stop_gradient=True)
         for _ in range(3)]
    helper.append_op("chunk_eval", inputs={"Inference": input, "Label": label},
                     outputs={"Precision": f[0], "Recall": f[1], "F1-Score": f[2],
                              "NumInferChunks": n[0], "NumLabelChunks": n[1],
                              "NumCorrectChunks": n[2]},
                     attrs={"num_chunk_types": int(num_chunk_types),
                            "chunk_scheme": chunk_scheme,
                            "excluded_chunk_types": [int(t) for t in
                                                     (excluded_chunk_types or [])]})
    return f[0], f[1], f[2], n[0], n[1], n[2]
