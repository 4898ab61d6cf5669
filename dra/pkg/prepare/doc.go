// Package prepare is the DRA driver's node side: it prepares the claims
// kube-scheduler allocated on the node's cards and unprepares them.
//
// For each claim not prepared yet, Prepare sums the memory that the
// checkpoint's claims hold on each card. It refuses a claim that would take
// a card over its capacity. It writes one CDI spec file per claim, a device
// per request, with the device plugin's environment and the isolation of the
// request's cards: driver mode's limit device, mps mode's pipe and log
// directories, or advisory environment only. It records the claim in the
// checkpoint before it answers. A claim prepared already, because kubelet
// retries or restarted, gets the recorded answer again. Unprepare removes
// the claim's spec and its checkpoint entry; an unknown claim is no error.
//
//	unprepared --Prepare--> prepared (checkpoint + CDI spec) --Unprepare--> unprepared
//	                 \--over capacity--> refused (kubelet retries)
//
// After a restart Restore writes the CDI specs of the checkpoint's claims
// again, starting their MPS daemons, and removes the specs of claims it does
// not hold. Containers that kubelet restarts thus still resolve their
// devices.
package prepare
