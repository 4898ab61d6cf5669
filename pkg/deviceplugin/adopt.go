package deviceplugin

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/handoff"
)

// adoptLoop re-advertises the cards whenever the legacy pods or their
// devices change (a legacy pod ended: its units are the card's own again).
func adoptLoop(ctx context.Context, h *handoff.Handoff, server *Server, cards []Card, last handoff.Adoption) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.LegacyChanged():
		}
		now := h.Adoption()
		server.SetAdopted(now.ByCard)
		logAdoption(logger, cards, &last, now)
		last = now
	}
}

// logAdoption logs how the legacy pods' devices are advertised, compared
// with the previous state (nil at start).
func logAdoption(logger klog.Logger, cards []Card, prev *handoff.Adoption, now handoff.Adoption) {
	was := map[string]handoff.LegacyPod{}
	if prev != nil {
		for _, p := range prev.Pods {
			was[p.Pod] = p
		}
	}
	is := map[string]bool{}
	for _, p := range now.Pods {
		is[p.Pod] = true
		if old, ok := was[p.Pod]; ok && old == p {
			continue
		}
		if p.Card < 0 {
			logger.Info("Pod holds devices of the previous device plugin on no known card; they are not advertised (no ALIYUN_COM_GPU_MEM_IDX naming a card of this node: Aliyun's plugin gave it no card)",
				"pod", p.Pod, "units", p.Units)
			continue
		}
		logger.Info("Pod admitted by the previous device plugin: its devices are advertised as units of its card until it ends",
			"pod", p.Pod, "card", p.Card, "units", p.Units)
	}
	for _, p := range adoptedPods(prev) {
		if !is[p.Pod] {
			logger.Info("Pod of the previous device plugin is gone; its units are the card's own again", "pod", p.Pod, "card", p.Card, "units", p.Units)
		}
	}
	for _, c := range cards {
		held := int64(len(now.ByCard[c.UUID]))
		if held > c.Units {
			logger.Info("Pods of the previous device plugin hold more units of a card than it has; it takes no new pods until they end",
				"card", c.Index, "held", held, "units", c.Units)
		}
	}
}

// adoptedPods returns a's pods, none for nil.
func adoptedPods(a *handoff.Adoption) []handoff.LegacyPod {
	if a == nil {
		return nil
	}
	return a.Pods
}
